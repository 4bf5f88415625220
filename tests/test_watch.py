"""`opgen watch`: regenerates when a spec changes, reports a bad spec with its location and
keeps watching, then recovers when the spec is fixed."""

from __future__ import annotations

import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_watch_regenerates_reports_errors_and_survives(tmp_path):
    project = tmp_path / "proj"
    (project / "specs").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "watched"\n')
    shutil.copy(ROOT / "specs" / "relu.yaml", project / "specs")
    proc = subprocess.Popen([sys.executable, "-u", "-m", "opgen", "--project", str(project), "watch", "--debounce-ms", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def wait_for(text: str, timeout: float = 60.0) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.2))
            except queue.Empty:
                continue
            if text in seen[-1]:
                return seen
        raise AssertionError(f"no {text!r} within {timeout} s; got:\n{''.join(seen)}")

    spec = project / "specs" / "relu.yaml"
    try:
        wait_for("opgen watch: watching specs")
        assert (project / "generated" / "docs" / "relu.md").is_file()

        spec.write_text(spec.read_text().replace("doc: Rectified", "doc: The rectified"))
        seen = wait_for("opgen: 1 ops")
        assert any("changed specs/relu.yaml" in s for s in seen) and any("wrote generated/docs/relu.md" in s for s in seen)
        assert "The rectified" in (project / "generated" / "docs" / "relu.md").read_text()

        good = spec.read_text()
        spec.write_text(good.replace("kernel:", "kernal:"))
        seen = wait_for("nothing was written")
        assert any("specs/relu.yaml:" in s and "kernal" in s for s in seen), "".join(seen)
        assert proc.poll() is None, "a bad spec stopped the watch"

        spec.write_text(good.replace("The rectified", "Rectified"))
        wait_for("opgen: 1 ops")
        assert "The rectified" not in (project / "generated" / "docs" / "relu.md").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
