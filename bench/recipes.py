"""The self-supervised recipes' transform objects, as their projects write them.

MoCo (facebookresearch/moco, moco-v3) and DINO (facebookresearch/dino) build
their augmentations from torchvision transforms plus a few small classes of
their own: PIL's ImageFilter.GaussianBlur and ImageOps.solarize behind
Python's ``random``. These are those classes and objects, in the projects'
shape and spelling (DINO's crops with ``interpolation=Image.BICUBIC``), so
that the benchmark (bench/multiview.py) and the tests
(tests/python/test_multiview.py, test_recipe_classes.py) hand stoker and
DataLoader what a user of those projects has. Nothing here is stoker's.
"""
from __future__ import annotations

import random
import warnings
from typing import Any, List, Sequence, Tuple

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class TwoCropsTransform:
    """MoCo's loader.TwoCropsTransform: two crops of one image."""

    def __init__(self, base_transform: Any) -> None:
        self.base_transform = base_transform

    def __call__(self, x: Any) -> List[Any]:
        q = self.base_transform(x)
        k = self.base_transform(x)
        return [q, k]


class TwoBaseTransforms:
    """MoCo v3's loader.TwoCropsTransform (BYOL's shape): two transforms."""

    def __init__(self, base_transform1: Any, base_transform2: Any) -> None:
        self.base_transform1 = base_transform1
        self.base_transform2 = base_transform2

    def __call__(self, x: Any) -> List[Any]:
        im1 = self.base_transform1(x)
        im2 = self.base_transform2(x)
        return [im1, im2]


class MocoGaussianBlur:
    """MoCo's loader.GaussianBlur: PIL's blur, radius uniform in `sigma`
    (MoCo wraps it in RandomApply)."""

    def __init__(self, sigma: Sequence[float] = (.1, 2.)) -> None:
        self.sigma = sigma

    def __call__(self, x: Any) -> Any:
        from PIL import ImageFilter
        sigma = random.uniform(self.sigma[0], self.sigma[1])
        x = x.filter(ImageFilter.GaussianBlur(radius=sigma))
        return x


class MocoSolarize:
    """MoCo v3's loader.Solarize."""

    def __call__(self, x: Any) -> Any:
        from PIL import ImageOps
        return ImageOps.solarize(x)


class DinoGaussianBlur:
    """DINO's utils.GaussianBlur: PIL's blur with probability p."""

    def __init__(self, p: float = 0.5, radius_min: float = 0.1, radius_max: float = 2.) -> None:
        self.prob = p
        self.radius_min = radius_min
        self.radius_max = radius_max

    def __call__(self, img: Any) -> Any:
        from PIL import ImageFilter
        do_it = random.random() <= self.prob
        if not do_it:
            return img
        return img.filter(
            ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class DinoSolarization:
    """DINO's utils.Solarization."""

    def __init__(self, p: float) -> None:
        self.p = p

    def __call__(self, img: Any) -> Any:
        from PIL import ImageOps
        if random.random() < self.p:
            return ImageOps.solarize(img)
        return img


def moco_v2(size: int = 224) -> Any:
    """MoCo v2's augmentation (SimCLR's, with MoCo's blur class)."""
    import torchvision.transforms as T
    return T.Compose([
        T.RandomResizedCrop(size, scale=(0.2, 1.)),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([MocoGaussianBlur([.1, 2.])], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=MEAN, std=STD)])


class DataAugmentationDINO:
    """DINO's main_dino.DataAugmentationDINO: two global crops, then
    `local_crops_number` local ones (the sizes are parameters here so that
    tests can run small)."""

    def __init__(self, global_crops_scale: Tuple[float, float],
                 local_crops_scale: Tuple[float, float], local_crops_number: int,
                 size: int = 224, local_size: int = 96) -> None:
        import torchvision.transforms as transforms
        from PIL import Image
        with warnings.catch_warnings():  # torchvision 0.14 on PIL's filter numbers
            warnings.simplefilter("ignore")
            flip_and_color_jitter = transforms.Compose([
                transforms.RandomHorizontalFlip(p=0.5),
                transforms.RandomApply(
                    [transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2,
                                            hue=0.1)],
                    p=0.8),
                transforms.RandomGrayscale(p=0.2),
            ])
            normalize = transforms.Compose([
                transforms.ToTensor(),
                transforms.Normalize(MEAN, STD),
            ])
            # first global crop
            self.global_transfo1 = transforms.Compose([
                transforms.RandomResizedCrop(size, scale=global_crops_scale,
                                             interpolation=Image.BICUBIC),
                flip_and_color_jitter,
                DinoGaussianBlur(1.0),
                normalize,
            ])
            # second global crop
            self.global_transfo2 = transforms.Compose([
                transforms.RandomResizedCrop(size, scale=global_crops_scale,
                                             interpolation=Image.BICUBIC),
                flip_and_color_jitter,
                DinoGaussianBlur(0.1),
                DinoSolarization(0.2),
                normalize,
            ])
            # transformation for the local small crops
            self.local_crops_number = local_crops_number
            self.local_transfo = transforms.Compose([
                transforms.RandomResizedCrop(local_size, scale=local_crops_scale,
                                             interpolation=Image.BICUBIC),
                flip_and_color_jitter,
                DinoGaussianBlur(p=0.5),
                normalize,
            ])

    def __call__(self, image: Any) -> List[Any]:
        crops = []
        crops.append(self.global_transfo1(image))
        crops.append(self.global_transfo2(image))
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops
