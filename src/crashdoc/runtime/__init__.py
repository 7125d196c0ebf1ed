"""`crashdoc run`: the daemon's loop, effects and HTTP view, wired from the layers below."""
