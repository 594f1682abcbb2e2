"""The Jinja job templates, shipped inside the hpcbench wheel as ``hpcbench.templates``."""
