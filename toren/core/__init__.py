"""The pure core: events, the fold, decisions and read models. No I/O, no clocks, no effects.

Everything here is a function of recorded events (and of values passed in); execution and the
host call it, it calls nothing back.
"""
