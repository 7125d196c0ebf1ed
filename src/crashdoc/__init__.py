"""crashdoc: why is this SGLang unit crash-looping, and which flag fixes it."""

__version__ = "0.1.0"
