"""The GPU paths of issue 14's bugs, run for real where a CUDA GPU is present.

Each bug also has a CPU unit test beside its helper (the pure decisions in
tests/test_torch_distributed.py, `keep_loss` and `uses_cuda_graphs` in
tests/test_compilation.py); these run the same helpers on the device they were written
for, and are skipped on a machine without CUDA.
"""

import pytest
import torch

from deepdive.core.compilation import keep_loss, uses_cuda_graphs
from deepdive.models import parity
from deepdive.models import torch_distributed as td

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def strict_fp32():
    """Strict fp32 for the test, the process's settings restored after it."""
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    yield parity.strict_fp32(jax=False).settings
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cuda.matmul.allow_tf32 = before[1]
    torch.backends.cudnn.allow_tf32 = before[2]


class LossNet(torch.nn.Module):
    """A step's forward that returns the loss, as chapter 3's GPT does."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                       torch.nn.Linear(64, 1))

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.net(x), y)


def train_losses(options, steps=8):
    """Chapter 3's loop on a small model: the losses of `steps` SGD steps, kept."""
    torch.manual_seed(0)
    model = LossNet().cuda()
    forward = model if options is None else torch.compile(model, **options)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 32, generator=generator).cuda(),
                torch.randn(16, 1, generator=generator).cuda()) for _ in range(steps)]
    losses = []
    for x, y in batches:
        if uses_cuda_graphs(options):
            torch.compiler.cudagraph_mark_step_begin()
        loss = forward(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(keep_loss(loss))
    return torch.stack(losses).cpu()  # read once, after every replay


@pytest.mark.parametrize("options", [dict(mode="reduce-overhead"), dict(backend="cudagraphs")])
def test_losses_kept_through_cuda_graph_replays_are_each_steps_own(strict_fp32, options):
    torch._dynamo.reset()
    eager = train_losses(None)

    replayed = train_losses(options)

    assert len(set(replayed.tolist())) == len(replayed)  # not one buffer read N times
    torch.testing.assert_close(replayed, eager, rtol=1e-4, atol=1e-6)


def relative_error(value, reference):
    return float((value.double().cpu() - reference).norm() / reference.norm())


def test_strict_fp32_has_no_tf32_in_matmuls_or_cudnn_convolutions(strict_fp32):
    """TF32 keeps 10 mantissa bits, an error near 1e-4 to 1e-3 on these; fp32 one near 1e-6."""
    strict = {"float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False,
              "cudnn.allow_tf32": False}
    assert strict_fp32 == strict
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(1024, 1024, generator=generator) for _ in range(2))
    images = torch.randn(8, 3, 224, 224, generator=generator)
    kernel = torch.randn(192, 3, 16, 16, generator=generator)  # a ViT's patch embedding

    matmul = relative_error(a.cuda() @ b.cuda(), a.double() @ b.double())
    conv = relative_error(torch.nn.functional.conv2d(images.cuda(), kernel.cuda(), stride=16),
                          torch.nn.functional.conv2d(images.double(), kernel.double(),
                                                     stride=16))

    assert matmul < 1e-5 and conv < 1e-5, (matmul, conv)


def test_the_one_process_reference_and_the_ranks_run_on_this_gpu(tmp_path):
    count = torch.cuda.device_count()
    world = min(count, 2)
    options = dict(width=32, depth=2, batch_size=8, steps=2, check_steps=3, device="cuda")

    single = td.spawn("single", 1, str(tmp_path), **options)[0]
    ranks = td.spawn("ddp", world, str(tmp_path), **options)

    assert single["device"] == "cuda:0"  # the reference, on the GPU too
    assert [r["device"] for r in ranks] == [f"cuda:{i}" for i in range(world)]
    assert {r["backend"] for r in ranks} == {"nccl"}
    assert single["device_label"] == torch.cuda.get_device_name(0)  # not the CPU's label
    assert [r["device_label"] for r in ranks] == [torch.cuda.get_device_name(i)
                                                  for i in range(world)]
    torch.testing.assert_close(torch.tensor(ranks[0]["losses"]),
                               torch.tensor(single["losses"]), rtol=1e-5, atol=1e-7)


def test_more_ranks_than_gpus_is_refused_before_any_process_starts(tmp_path):
    count = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"but it has {count} "):
        td.spawn("ddp", 2 * count, str(tmp_path), batch_size=8 * count)
