"""quickstart-pytorch-fairfl: Flower's PyTorch quickstart with a fairfl rule."""
