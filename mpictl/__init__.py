"""mpictl: turn bare-metal Linux machines into a working MPI cluster for deep learning."""

__version__ = "0.1.0"
