"""deepdive.models.data: download and cache, a labelled synthetic fallback, nanoGPT-style
batches."""

import http.server
import threading

import numpy as np
import pytest

from deepdive.models.data import SHAKESPEARE_CHARS, batches, shakespeare_chars

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n"


@pytest.fixture
def text_server():
    """Serves TEXT on a loopback port, the stand-in for the real download."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            body = TEXT.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/input.txt"
    server.shutdown()


def closed_port_url() -> str:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_port
    server.server_close()
    return f"http://127.0.0.1:{port}/input.txt"


def test_download_is_encoded_and_cached(tmp_path, text_server):
    corpus = shakespeare_chars(tmp_path, url=text_server)

    assert corpus.source == "downloaded"
    assert (tmp_path / "tinyshakespeare.txt").read_text() == TEXT
    assert corpus.vocab_size == len(set(TEXT))
    assert len(corpus.tokens) == len(TEXT)
    alphabet = sorted(set(TEXT))
    assert "".join(alphabet[i] for i in corpus.tokens) == TEXT


def test_the_cache_is_used_without_the_network(tmp_path, text_server):
    shakespeare_chars(tmp_path, url=text_server)

    corpus = shakespeare_chars(tmp_path, url=closed_port_url())

    assert corpus.source == "cache"
    assert len(corpus.tokens) == len(TEXT)


def test_no_network_gives_a_labelled_synthetic_stream(tmp_path):
    url = closed_port_url()

    corpus = shakespeare_chars(tmp_path, url=url, timeout_s=2, synthetic_chars=5000)

    assert corpus.source == "synthetic"
    assert url in corpus.note and "random characters" in corpus.note
    assert corpus.vocab_size == SHAKESPEARE_CHARS
    assert len(corpus.tokens) == 5000 and corpus.tokens.max() < SHAKESPEARE_CHARS
    assert not (tmp_path / "tinyshakespeare.txt").exists()


def test_batches_are_windows_with_targets_shifted_by_one():
    tokens = np.arange(100)

    inputs, targets = next(batches(tokens, batch_size=4, block_size=8, seed=1))

    assert inputs.shape == targets.shape == (4, 8)
    np.testing.assert_array_equal(targets, inputs + 1)
    np.testing.assert_array_equal(np.diff(inputs, axis=1), 1)


def test_batches_are_deterministic_for_a_seed():
    tokens = np.arange(1000)
    first = next(batches(tokens, 2, 16, seed=7))[0]
    again = next(batches(tokens, 2, 16, seed=7))[0]

    np.testing.assert_array_equal(first, again)


def test_batches_reject_a_corpus_shorter_than_a_block():
    with pytest.raises(ValueError, match="longer than block_size=8"):
        next(batches(np.arange(5), 2, 8))
