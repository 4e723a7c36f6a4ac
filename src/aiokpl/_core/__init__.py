"""The pure core: synchronous code with no I/O, no clock and no event loop."""
