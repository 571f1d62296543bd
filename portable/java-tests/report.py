"""Prints the ValidatesRunner run's table from surefire's reports: passed, failed and skipped
tests per class, then every test that did not pass with its reason, then the totals.
Exits 1 when a test failed or none ran.

    python3 report.py SUREFIRE_REPORTS_DIR RUNNER [--markdown]
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def reason(node):
    text = (node.get("message") or node.text or node.get("type") or "").strip()
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    # Beam's client opens every runner error with the same line: the next one says what.
    generic = "The Runner experienced the following error during execution:"
    if lines and lines[0] == generic:
        lines = lines[1:]
    return " ".join(lines[:2])[:400]


def main():
    reports, runner = sys.argv[1], sys.argv[2]
    rows, problems = {}, []
    for path in sorted(glob.glob(os.path.join(reports, "TEST-*.xml"))):
        for case in ET.parse(path).getroot().iter("testcase"):
            cls = case.get("classname", "?").replace("org.apache.beam.sdk.", "")
            row = rows.setdefault(cls, [0, 0, 0])
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            skipped = case.find("skipped")
            if bad is not None:
                row[1] += 1
                problems.append(("FAILED", f"{cls}#{case.get('name')}", reason(bad)))
            elif skipped is not None:
                row[2] += 1
                problems.append(("skipped", f"{cls}#{case.get('name')}", reason(skipped)))
            else:
                row[0] += 1
    width = max([len(c) for c in rows] + [5])
    print(f"== Beam Java ValidatesRunner on Weir ({runner})")
    print(f"{'class':<{width}}  passed  failed  skipped")
    for cls, (p, f, s) in sorted(rows.items()):
        print(f"{cls:<{width}}  {p:>6}  {f:>6}  {s:>7}")
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    for kind, name, why in problems:
        print(f"{kind}: {name}: {why}")
    ran = sum(total)
    print(f"== {ran} tests ran: {total[0]} passed, {total[1]} failed, {total[2]} skipped")
    if ran == 0 or total[1] > 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
