"""A minimal Flower app that depends on fairfl, for the dependency-recipe tests."""
