"""`srag car`: one CAR baseline cell in process (`run_cell`), a grid of them as Ray tasks (`run_grid`), and the grid
logged to MLflow as a parent run with a child per cell (`log_grid`).
"""

from pipelines.engine.car._grid import CellOptions, CellResult, grid_table, log_grid, num, run_cell, run_grid

__all__ = ["CellOptions", "CellResult", "grid_table", "log_grid", "num", "run_cell", "run_grid"]
