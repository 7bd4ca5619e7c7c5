"""The parameter counts DeepLearningExamples' own TF2 EfficientNet code builds (nvidia_dle_cnn_translation.py's
"stated" counts): run with a Python that has tensorflow-cpu (2.21 here) and tf_keras (the examples
are Keras 2 code), DLE_SRC the checkout of `git archive 729963dd TensorFlow2/Classification/ConvNets`."""
import os
import sys
import types
from importlib import import_module

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, f"{os.environ.get('DLE_SRC', '.')}/TensorFlow2/Classification/ConvNets")


class Stub(types.ModuleType):
    """Horovod, DALI, the data pipeline, optimizers and loggers: no model weight among them."""
    __path__ = []

    def __getattr__(self, name):
        return type(name, (), {"__init__": lambda self, *a, **k: None})


for name in ("horovod", "horovod.tensorflow", "tensorflow_addons", "tensorflow_addons.optimizers",
             "tensorflow_addons.image", "tensorflow_datasets", "dllogger", "dataloader.Dali",
             "dataloader.dataset_factory"):
    sys.modules[name] = Stub(name)
sys.modules["horovod.tensorflow"].size = lambda: 1
sys.modules["horovod.tensorflow"].rank = sys.modules["horovod.tensorflow"].local_rank = lambda: 0

import tensorflow as tf  # noqa: E402
from config.defaults import Config  # noqa: E402  (main.py's config object)

for cfg in ("config.efficientnet_v1.b0_cfg", "config.efficientnet_v1.b4_cfg", "config.efficientnet_v2.s_cfg"):
    mparams = import_module(cfg).config
    config = Config(dict(mode="predict", grad_accum_steps=1, weight_decay=5e-6, train_batch_size=8,
                         mixup_alpha=0.0, cutmix_alpha=0.0, defer_img_mixing=False))
    config.mparams = Config(mparams)
    weights = import_module(mparams["path_to_impl"]).Model(config).model.trainable_weights
    print(f"{cfg}: {sum(int(tf.size(w)) for w in weights):,} parameters in {len(weights)} tensors")
