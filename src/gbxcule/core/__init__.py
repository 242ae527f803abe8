"""Pure-Python core: hardware tables, cartridge headers, action codecs and schedules."""
