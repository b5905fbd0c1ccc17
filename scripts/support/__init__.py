"""What the scripts share with the tests: the rank spawner (:mod:`.dist`), rank placement
(:mod:`.placement`), the compiled-poll check (:mod:`.polls`) and the emulated ranks of the
fused sampling path (:mod:`.emulated`, :mod:`.phases`). The tests import these from here;
nothing under ``scripts/`` imports ``tests`` (``tests/package/test_layout.py``)."""
