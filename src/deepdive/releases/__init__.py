"""Releases over time, the book's fifth layer (it may import every layer below it): each jax
release measured with torch held at the book's pin and each torch release with jax held, in
a throwaway environment per release, one bundle of evidence each under `book/data/releases/`
beside `runs.csv`, the ledger of every attempt (`make releases`). `matrix` (which releases,
what each installs, runs.csv), `workloads` (the reduced set, run inside a release's
environment) and `run` (the throwaway environments and the bundles). The ledger page reads
them back (`deepdive.chapters.ledger.releases`)."""
