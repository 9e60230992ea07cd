"""The cliff finder behind tools/sweep.py: draws lengths, head shapes and mask parameters from a
seed (draw.py), estimates what a drawn sweep costs on an H100 (estimate.py), writes the matrix
specs and the script that runs them (plan.py), and judges flex_flash's results against its own
full and its peers (report.py).
Rule: a draw depends only on the seed and the options, never on the machine or the Python
version (draw.py makes its own integers from random.random())."""
