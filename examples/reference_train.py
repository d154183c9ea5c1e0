"""A classification training script shaped like torchvision's reference
(references/classification/train.py and presets.py of torchvision 0.14),
written for torch's DataLoader, with nothing of stoker in it.

Its data code is the reference's: ImageFolder datasets with the
ClassificationPresetTrain / ClassificationPresetEval callables,
``torch.utils.data.RandomSampler`` / ``SequentialSampler`` (or
``DistributedSampler`` under torchrun), ``torch.utils.data.DataLoader`` by
its full name, a ``collate_fn`` closure applying RandomChoice([RandomMixup,
RandomCutmix]) to ``default_collate``'s batch, label smoothing, and an
evaluation that compares the samples it saw with ``len(dataset)``.

tests/python/test_stoker_run.py runs it as it is and under
``python -m stoker run`` (one process, and two ranks through torchrun),
unchanged, and compares what it prints.

    python3 examples/reference_train.py --data-path DIR [--epochs 2] [--auto-augment ta_wide]
        [--random-erase 0.1] [--mixup-alpha 0.2] [--cutmix-alpha 1.0]
        [--label-smoothing 0.1] [--dump-eval FILE]
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torchvision
from torch.utils.data.dataloader import default_collate
from torchvision.transforms import autoaugment, transforms
from torchvision.transforms.functional import InterpolationMode


class ClassificationPresetTrain:
    def __init__(self, *, crop_size, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 interpolation=InterpolationMode.BILINEAR, hflip_prob=0.5,
                 auto_augment_policy=None, ra_magnitude=9, augmix_severity=3,
                 random_erase_prob=0.0):
        trans = [transforms.RandomResizedCrop(crop_size, interpolation=interpolation)]
        if hflip_prob > 0:
            trans.append(transforms.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy == "ra":
            trans.append(autoaugment.RandAugment(interpolation=interpolation,
                                                 magnitude=ra_magnitude))
        elif auto_augment_policy == "ta_wide":
            trans.append(autoaugment.TrivialAugmentWide(interpolation=interpolation))
        elif auto_augment_policy == "augmix":
            trans.append(autoaugment.AugMix(interpolation=interpolation,
                                            severity=augmix_severity))
        elif auto_augment_policy is not None:
            trans.append(autoaugment.AutoAugment(
                policy=autoaugment.AutoAugmentPolicy(auto_augment_policy),
                interpolation=interpolation))
        trans.extend([transforms.PILToTensor(), transforms.ConvertImageDtype(torch.float),
                      transforms.Normalize(mean=mean, std=std)])
        if random_erase_prob > 0:
            trans.append(transforms.RandomErasing(p=random_erase_prob))
        self.transforms = transforms.Compose(trans)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size=256, mean=(0.485, 0.456, 0.406),
                 std=(0.229, 0.224, 0.225), interpolation=InterpolationMode.BILINEAR):
        self.transforms = transforms.Compose([
            transforms.Resize(resize_size, interpolation=interpolation),
            transforms.CenterCrop(crop_size),
            transforms.PILToTensor(),
            transforms.ConvertImageDtype(torch.float),
            transforms.Normalize(mean=mean, std=std),
        ])

    def __call__(self, img):
        return self.transforms(img)


class RandomMixup(torch.nn.Module):
    """The reference's batch mixup (transforms.py), applied in collate_fn."""

    def __init__(self, num_classes, p=0.5, alpha=1.0):
        super().__init__()
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    def forward(self, batch, target):
        target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch_rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(batch_rolled)
        target_rolled.mul_(1.0 - lam)
        target.mul_(lam).add_(target_rolled)
        return batch, target


class RandomCutmix(RandomMixup):
    def forward(self, batch, target):
        target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        batch_rolled, target_rolled = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        h, w = batch.shape[-2:]
        r_x, r_y = torch.randint(w, (1,)), torch.randint(h, (1,))
        r = 0.5 * (1.0 - lam) ** 0.5
        rw, rh = int(r * w), int(r * h)
        x1, y1 = int(torch.clamp(r_x - rw, min=0)), int(torch.clamp(r_y - rh, min=0))
        x2, y2 = int(torch.clamp(r_x + rw, max=w)), int(torch.clamp(r_y + rh, max=h))
        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (w * h))
        target_rolled.mul_(1.0 - lam)
        target.mul_(lam).add_(target_rolled)
        return batch, target


def load_data(traindir, valdir, args):
    dataset = torchvision.datasets.ImageFolder(
        traindir, ClassificationPresetTrain(crop_size=args.train_crop_size,
                                            auto_augment_policy=args.auto_augment,
                                            random_erase_prob=args.random_erase))
    dataset_test = torchvision.datasets.ImageFolder(
        valdir, ClassificationPresetEval(crop_size=args.val_crop_size,
                                         resize_size=args.val_resize_size))
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test,
                                                                       shuffle=False)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
        test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    return dataset, dataset_test, train_sampler, test_sampler


def main(args):
    args.distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    rank = 0
    if args.distributed:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    torch.manual_seed(args.seed)
    dataset, dataset_test, train_sampler, test_sampler = load_data(
        os.path.join(args.data_path, "train"), os.path.join(args.data_path, "val"), args)

    collate_fn = None
    num_classes = len(dataset.classes)
    mixup_transforms = []
    if args.mixup_alpha > 0.0:
        mixup_transforms.append(RandomMixup(num_classes, p=1.0, alpha=args.mixup_alpha))
    if args.cutmix_alpha > 0.0:
        mixup_transforms.append(RandomCutmix(num_classes, p=1.0, alpha=args.cutmix_alpha))
    if mixup_transforms:
        mixupcutmix = torchvision.transforms.RandomChoice(mixup_transforms)

        def collate_fn(batch):
            return mixupcutmix(*default_collate(batch))

    data_loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, sampler=train_sampler, num_workers=args.workers,
        pin_memory=True, collate_fn=collate_fn)
    data_loader_test = torch.utils.data.DataLoader(
        dataset_test, batch_size=args.batch_size, sampler=test_sampler,
        num_workers=args.workers, pin_memory=True)
    assert isinstance(data_loader, torch.utils.data.DataLoader)

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(8, num_classes))
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for epoch in range(args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        model.train()
        batches, seen = 0, 0
        for image, target in data_loader:
            loss = criterion(model(image), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batches += 1
            seen += image.shape[0]
            soft = target.dim() == 2
        print(json.dumps({"rank": rank, "epoch": epoch, "batches": batches, "samples": seen,
                          "len": len(data_loader), "soft_targets": soft,
                          "shape": list(image.shape)}), flush=True)
        model.eval()
        evaluated, labels, first = 0, [], None
        with torch.inference_mode():
            for image, target in data_loader_test:
                model(image)
                if first is None:
                    first = image.clone()
                evaluated += image.shape[0]
                labels += target.tolist()
        print(json.dumps({"rank": rank, "epoch": epoch, "evaluated": evaluated,
                          "dataset_len": len(data_loader_test.dataset),
                          "eval_labels": labels}), flush=True)
        if args.dump_eval and epoch == 0:
            torch.save(first, f"{args.dump_eval}.{rank}")
    if args.distributed:
        dist.destroy_process_group()


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-path", required=True)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-crop-size", type=int, default=48)
    p.add_argument("--val-crop-size", type=int, default=48)
    p.add_argument("--val-resize-size", type=int, default=56)
    p.add_argument("--auto-augment", default=None)
    p.add_argument("--random-erase", type=float, default=0.0)
    p.add_argument("--mixup-alpha", type=float, default=0.0)
    p.add_argument("--cutmix-alpha", type=float, default=0.0)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--dump-eval", default="")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
