#!/bin/sh
# Profiles the recipe subset of examples/cpu_recipes_subset/ (every value of every recipe key,
# 8 recipes per network) on the host CPU, the five configs in order, into out/recipes_subset/;
# benchmarks/recipe_accuracy.py reads the logs. Then, twice, forgets the latency tests that
# other processes disturbed (benchmarks/remeasure_disturbed.py) and profiles them again: on a
# shared machine they are many. Run from the repository root, with perf4sight's environment
# first on PATH (`PATH=.venv/bin:$PATH`):
#   sh benchmarks/profile_recipe_subset.sh
# A stopped run resumes where it stopped when started again.
set -e
profile() {
    for config in examples/cpu_recipes_subset/*.ini; do
        echo "== $config"
        perf4sight run --config "$config"
    done
}
profile
for round in 1 2; do
    python benchmarks/remeasure_disturbed.py out/recipes_subset/logs
    profile
done
