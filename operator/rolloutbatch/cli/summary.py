"""What a finished watch prints: the summary table of every batch, then its failure reasons."""

from __future__ import annotations

from rolloutbatch.cli import render
from rolloutbatch.core import vocabulary as v
from rolloutbatch.sdk import BatchHandle, result_ops


def print_summaries(console, handles: list[BatchHandle]) -> None:
    columns = [(h.name, render.summary(h.status)) for h in handles]
    render.print_summary(console, columns, title="RolloutBatch results")
    for h in handles:
        s = h.status
        phase = s.get("phase") or v.PENDING
        text = f"{h.namespace}/{h.name}: {render.safe_line(phase)}"
        if s.get("message"):
            text += f" - {render.safe_line(s['message'])}"
        if s.get("resultsConfigMap"):
            text += f" (per-episode rows: ConfigMap {h.namespace}/{s['resultsConfigMap']}; " \
                    f"rolloutbatch results {h.name} -n {h.namespace} --output DIR)"
        # literal: the message quotes what the user wrote ('[/fast]' would be read as rich markup)
        console.print(text, soft_wrap=True, highlight=False, markup=False)
        for line in failure_summary(h):
            console.print(line, soft_wrap=True, highlight=False, markup=False)


def failure_summary(handle: BatchHandle, examples: int = 3) -> list[str]:
    """Failed, lost and stopped episodes by reason (counts, a few examples), from the results rows."""
    from rolloutbatch.kube.errors import KubeError

    s = handle.status
    if not (s.get("failedEpisodes") or s.get("lostEpisodes") or s.get("stoppedEpisodes")):
        return []
    try:
        document = handle.document()
    except KubeError as exc:
        return [f"  (failure reasons unavailable: {exc})"]
    rows = document.get("pods") or []
    incomplete = result_ops.incomplete(document, handle.obj)
    by_reason: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("outcome") != v.OUTCOME_SUCCEEDED:
            by_reason.setdefault(f"{row.get('outcome')} {row.get('reason') or '?'}", []).append(row)
    lines = [f"  episodes of {handle.name} that did not succeed, by reason:"] if by_reason else []
    if incomplete is not None:
        lines.append(f"  (counted without some rows: {incomplete})")
    for reason, group in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"    {len(group):>5}  {render.safe_line(reason)}")
        for row in group[:examples]:
            # the rows are anyone's with write access to the results ConfigMap: every field escaped
            message = render.safe_line(" ".join(str(row.get("message") or "").split())[:160])
            episode = render.safe_line(f"episode {row.get('index')} ({row.get('pod')}):")
            lines.append(f"           {episode} {message}")
    return lines
