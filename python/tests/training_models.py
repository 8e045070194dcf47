"""The tiny MLP that the training-step and device tests judge, its labelled sample and its loss.
test_explain_training's CLI test copies this file as a user's factories file (MODULE:FACTORY), so
it imports torch alone."""

import torch


class MLP(torch.nn.Module):
    """linear, GELU, layer norm, linear: the backward has matmuls, a pointwise derivative, the
    layer norm's backward and the loss's. `labels`, the sample's second part, is the loss's to read."""

    def __init__(self, features=16, hidden=32, classes=4):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(features, hidden),
            torch.nn.GELU(),
            torch.nn.LayerNorm(hidden),
            torch.nn.Linear(hidden, classes),
        )

    def forward(self, x, labels=None):
        return self.net(x)


def labelled_sample():
    """8 rows of the default MLP's 16 features and their class labels."""
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)


def mlp():
    """The CLI's factory: the model and its sample."""
    return MLP(), labelled_sample()


def cross_entropy(output, sample):
    return torch.nn.functional.cross_entropy(output, sample[1])
