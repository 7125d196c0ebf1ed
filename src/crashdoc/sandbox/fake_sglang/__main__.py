"""``python -m crashdoc.sandbox.fake_sglang``: the launcher of the SGLang stand-in."""

from crashdoc.sandbox.fake_sglang.launcher import main

if __name__ == "__main__":
    main()
