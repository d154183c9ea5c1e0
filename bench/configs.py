"""What the benchmark measures: the batch, the workers and prefetch of both
sides, the training recipes and every configuration of bench.py's rows.
Shared by bench.py (measuring) and report.py (writing RESULTS.md)."""
from __future__ import annotations

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 64
WORKERS = 2
RING_SLOTS = 4  # stoker's prefetch depth, in batches
DL_PREFETCH = 2  # DataLoader's prefetch_factor: 2 x WORKERS batches in flight
# The training recipes (issue 15), each one torchvision Compose that both
# sides are given: ImageFolder's transform on the DataLoader side,
# stoker.Loader(transform=...) on stoker's (read into stoker ops by
# stoker/_transforms.py). "v2": torchvision's reference recipe (the
# classification references' --auto-augment ta_wide --random-erase 0.1 at
# train-crop-size 176); "ra": timm-like rand-m9 at 224.
RECIPES = ("v2", "ra")
# The ops of the recipes that the CPU cost check leaves out for its baseline:
# the policies and RandomErasing (what issue 15 added; RandomResizedCrop,
# the flip and the output stay).
RECIPE_OPS = ("AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix", "RandomErasing")
# (key, label, kind, pipeline, dtype, layout, baseline key)
CONFIGS = [
    ("dl_train", "DataLoader train f32 NCHW", "dl", "train", "float32", "nchw", None),
    ("stk_train_f32", "stoker train f32 NCHW", "stoker", "train", "float32", "nchw", "dl_train"),
    ("stk_train_u8", "stoker train u8 NHWC", "stoker", "train", "uint8", "nhwc", "dl_train"),
    ("dl_eval", "DataLoader eval f32 NCHW", "dl", "eval", "float32", "nchw", None),
    ("stk_eval_f32", "stoker eval f32 NCHW", "stoker", "eval", "float32", "nchw", "dl_eval"),
    ("tool_train_f32", "image-tool train f32 NCHW, 1 thread", "tool", "train", "float32", "nchw",
     "dl_train"),
    ("tool_train_u8", "image-tool train u8 NHWC, 1 thread", "tool", "train", "uint8", "nhwc",
     "dl_train"),
    ("tool_eval_f32", "image-tool eval f32 NCHW, 1 thread", "tool", "eval", "float32", "nchw",
     "dl_eval"),
    ("tool2_train_f32", "image-tool train f32 NCHW, 2 threads into 64 MiB rings", "tool", "train",
     "float32", "nchw", "dl_train"),
]
# Tool configs run with other than 1 thread writing into a cached buffer:
# (threads, MiB of ring per thread). tool2_train_f32 is what this machine's
# cores give when both decode at once and write beyond the caches, as the
# daemon's 2 workers do: the ceiling the daemon is held to in practice.
TOOL_SHAPE = {"tool2_train_f32": (2, 64)}
# The recipes, on the ImageNet-like set only, in the same round-robin: each
# recipe's Compose on both sides, and stoker's single-thread loop with the
# recipe's op list (read from the same Compose) and without its RECIPE_OPS,
# for what those ops cost in CPU per image. float32 NCHW, as the Composes end.
RECIPE_CONFIGS = [
    ("dl_v2", "DataLoader v2 recipe (TrivialAugmentWide, RandomErasing) 176 f32", "dl", "v2",
     "float32", "nchw", None),
    ("stk_v2", "stoker v2 recipe, the same Compose", "stoker", "v2", "float32", "nchw", "dl_v2"),
    ("dl_ra", "DataLoader RandAugment(2, 9) recipe 224 f32", "dl", "ra", "float32", "nchw",
     None),
    ("stk_ra", "stoker RandAugment recipe, the same Compose", "stoker", "ra", "float32", "nchw",
     "dl_ra"),
    ("tool_v2", "image-tool v2 recipe, 1 thread", "tool", "v2", "float32", "nchw", "dl_v2"),
    ("tool_v2_base", "image-tool v2 recipe less TrivialAugmentWide + RandomErasing, 1 thread",
     "tool", "v2-base", "float32", "nchw", "dl_v2"),
    ("tool_ra", "image-tool RandAugment recipe, 1 thread", "tool", "ra", "float32", "nchw",
     "dl_ra"),
    ("tool_ra_base", "image-tool RandAugment recipe less RandAugment, 1 thread", "tool",
     "ra-base", "float32", "nchw", "dl_ra"),
]
# The recipes on the second daemon, the one with --transcode-cache (below),
# epoch 2 on: the set's progressive files decoded from their baseline copies.
RECIPE_TC_CONFIGS = [
    ("stk_v2_tc", "stoker v2 recipe, --transcode-cache (epoch 2 on)", "stoker_tc", "v2",
     "float32", "nchw", "dl_v2"),
    ("stk_ra_tc", "stoker RandAugment recipe, --transcode-cache (epoch 2 on)", "stoker_tc", "ra",
     "float32", "nchw", "dl_ra"),
]
# recipe -> (title, DataLoader key, stoker key, loop key, loop-without-its-ops key, what the
# baseline leaves out, stoker with the transcode cache key)
RECIPE_KEYS = {
    "v2": ("v2: RandomResizedCrop(176) + flip + TrivialAugmentWide + RandomErasing(0.1)",
           "dl_v2", "stk_v2", "tool_v2", "tool_v2_base", "TrivialAugmentWide + RandomErasing",
           "stk_v2_tc"),
    "ra": ("rand-m9: RandomResizedCrop(224) + flip + RandAugment(2, 9)", "dl_ra", "stk_ra",
           "tool_ra", "tool_ra_base", "RandAugment", "stk_ra_tc"),
}
SMALL_CONFIGS = CONFIGS + RECIPE_CONFIGS
# Issue 17, on the large-photo sets (baseline files, progressive files): PIL's
# full decode alone, one thread, files in memory (what each DataLoader worker
# pays per image before any transform), and stoker on a second daemon started
# with --transcode-cache DIR (where stokerd has the option), measured once an
# untimed epoch has written the baseline copies of the progressive files.
PIL_CONFIG = ("pil_decode", "PIL full decode (Image.open + load), 1 thread", "pil", "decode",
              "uint8", "nhwc", None)
TC_CONFIGS = [
    ("stk_train_f32_tc", "stoker train f32 NCHW, --transcode-cache (epoch 2 on)", "stoker_tc",
     "train", "float32", "nchw", "dl_train"),
    ("stk_eval_f32_tc", "stoker eval f32 NCHW, --transcode-cache (epoch 2 on)", "stoker_tc",
     "eval", "float32", "nchw", "dl_eval"),
]
LARGE_CONFIGS = CONFIGS + [PIL_CONFIG]
# The ImageNet-like set measures both: its plain pipelines and recipes on
# the cache daemon too (its 20% progressive files).
SMALL_TC_CONFIGS = TC_CONFIGS + RECIPE_TC_CONFIGS
ALL_CONFIGS = SMALL_CONFIGS + [PIL_CONFIG] + SMALL_TC_CONFIGS
CFG = {c[0]: c for c in ALL_CONFIGS}
# daemon config -> the single-process loop it is compared with
EFFICIENCY = [("stk_train_f32", "tool_train_f32"), ("stk_train_u8", "tool_train_u8"),
              ("stk_eval_f32", "tool_eval_f32")]
