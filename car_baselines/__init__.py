"""car_baselines."""
