"""`perf4sight cache info` and `perf4sight cache clear`: the disk cache of traced and recorded
base networks (`perf4sight.cache`), which loads no torch."""

from __future__ import annotations

import typer

from perf4sight import console

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add `cache` to the perf4sight app."""
    cache_app = typer.Typer(
        name="cache", help="Show or empty the cache of traced and recorded networks.", no_args_is_help=True,
    )

    @cache_app.command("info")
    def info() -> None:
        """Where the cache is, how many networks it holds and their size."""
        from perf4sight.cache import SWITCH_VARIABLE, bound_bytes, cache_info

        found = cache_info()
        if found.folder is None:
            console.out.print(f"the cache is off ({SWITCH_VARIABLE}=0)")
            return
        console.out.print(f"{found.folder}: {found.entries} entries, {found.bytes / (1 << 20):.1f} MiB "
                          f"(at most {bound_bytes() / (1 << 20):g} MiB)")

    @cache_app.command("clear")
    def clear() -> None:
        """Remove every entry of the cache."""
        from perf4sight.cache import cache_dir, clear_cache

        removed = clear_cache()
        console.info(f"removed {removed} entries from {cache_dir()}")

    app.add_typer(cache_app, name="cache")
