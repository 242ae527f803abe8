"""gbxcule: thousands of Game Boy (DMG) emulators in parallel, one GPU thread per Game Boy."""

__version__ = "0.1.0"

import warnings as _warnings

# pysdl2-dll announces its bundled SDL2 when PyBoy is imported; gbxcule runs PyBoy headless.
_warnings.filterwarnings("ignore", message="Using SDL2 binaries", category=UserWarning)
