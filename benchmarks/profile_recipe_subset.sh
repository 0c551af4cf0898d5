#!/bin/sh
# Profiles the recipe subset of examples/cpu_recipes_subset/ (every value of every recipe key,
# 8 recipes per network) on the host CPU, the five configs in order, into out/recipes_subset/;
# benchmarks/recipe_accuracy.py reads the logs. Run from the repository root:
#   sh benchmarks/profile_recipe_subset.sh
# A stopped run resumes where it stopped when started again.
set -e
for config in examples/cpu_recipes_subset/*.ini; do
    echo "== $config"
    perf4sight run --config "$config"
done
