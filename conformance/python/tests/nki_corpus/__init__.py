"""Our own NKI kernels (legacy `neuronxcc.nki` API, Neuron SDK 2.26-2.28), written from AWS's public
NKI documentation for the patterns real kernels use. Each has a NumPy reference test in
tests/test_nki_corpus.py. Import after `trnsim.nki.install()`."""
