"""neuron_inductor: a torch.compile backend that compiles graphs to NKI kernels for AWS Trainium."""
__version__ = "0.1.0"
