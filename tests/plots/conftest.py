"""Fixtures of the jacond_plots tests."""

import pytest


@pytest.fixture
def saved_figures(monkeypatch):
    """keep(module): a dict that receives, by name, every figure module.save is given, as it is
    saved (the figure is still written)."""
    def keep(module):
        figures = {}
        original = module.save
        def save(fig, directory, name, formats):
            figures[name] = fig
            return original(fig, directory, name, formats)
        monkeypatch.setattr(module, "save", save)
        return figures
    return keep
