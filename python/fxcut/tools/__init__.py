"""fxcut's tooling, apart from the library: the ``fxcut`` command
(:mod:`.cli`), the model capture (:mod:`.capture`) and the models it traces
(:mod:`.models`), the HTML page (:mod:`.html`) and the partition report
(:mod:`.report`).

Nothing on the partition path imports this package: ``import fxcut``, the
``torch.compile`` and DeepSpeed integrations and a partition load none of
it (tests/test_package_shape.py checks it, from the source and in a fresh
interpreter).
"""
