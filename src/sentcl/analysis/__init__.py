"""Geometry of embeddings: alignment/uniformity, anisotropy and spectrum, figures, reports."""
