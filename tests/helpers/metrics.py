"""Reading `.sand/metrics` the way Prometheus does (the official client's parser) and checking
it against status.json figures read just before and just after it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> Samples:
    """(sample name, sorted labels) -> value; every family must carry HELP and a known TYPE."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("sandfs_") and family.documentation, family.name
        assert family.type in ("counter", "gauge"), family
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out, f"sample {key} given twice"
            out[key] = sample.value
    return out


def status_figures(status: dict) -> Samples:
    """The metric samples status.json's figures stand for."""
    figures = {"sandfs_frames_decoded_total": status["frames_decoded"],
               "sandfs_frames_decoded_independent_total": status["frames_decoded_independent"],
               "sandfs_views_materialized_total": status["views_materialized"],
               "sandfs_memory_limit_bytes": status["memory_limit_bytes"],
               "sandfs_cache_hits_total": status["cache"]["hits"],
               "sandfs_cache_misses_total": status["cache"]["misses"],
               "sandfs_cache_evictions_total": status["cache"]["evictions"],
               "sandfs_cache_bytes_used": status["cache"]["bytes_used"],
               "sandfs_jobs_done_total": status["scheduler"]["jobs_done"],
               "sandfs_remote_bytes_fetched_total": status["remote"]["bytes_fetched"],
               "sandfs_bad_videos": len(status["bad_videos"])}
    out: Samples = {(name, ()): value for name, value in figures.items()}
    for task, fig in status["tasks"].items():
        label = (("task", task),)
        out[("sandfs_views_served_total", label)] = fig["views_served"]
        out[("sandfs_stall_seconds_total", label)] = fig["stall_seconds"]
        for what in ("epoch", "iteration"):
            out[("sandfs_task_position", (("task", task), ("what", what)))] = fig[what]
    return out


def assert_between(metrics: Samples, before: dict, after: dict) -> None:
    """Each figure in the metrics lies between its values in two status reads around it."""
    low, high = status_figures(before), status_figures(after)
    for key, value in low.items():
        assert key in metrics, f"{key} missing from the metrics"
        assert min(value, high[key]) <= metrics[key] <= max(value, high[key]), \
            (key, value, metrics[key], high[key])
