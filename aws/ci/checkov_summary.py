"""Reads checkov's JSON report: prints each failed check, and exits non-zero if any failed,
any file did not parse, or the module was not scanned at all."""

from __future__ import annotations

import json
import sys

#: The module has about 80 resources; far fewer means checkov did not read it.
MIN_RESOURCES = 50


def main(path: str) -> int:
    with open(path, encoding="utf-8") as report_file:
        loaded = json.load(report_file)
    reports = loaded if isinstance(loaded, list) else [loaded]
    failed = 0
    for report in reports:
        summary = report["summary"]
        kind = report.get("check_type", "?")
        print(f"aws-check: checkov {kind}: {summary['passed']} passed, {summary['failed']} "
              f"failed, {summary['skipped']} waived, {summary['parsing_errors']} files "
              f"unparsed, {summary['resource_count']} resources", file=sys.stderr)
        for check in report["results"].get("failed_checks", []):
            print(f"  FAILED {check['check_id']} {check['resource']} "
                  f"({check['file_path']}:{check['file_line_range'][0]}): {check['check_name']}",
                  file=sys.stderr)
        for parse_error in report["results"].get("parsing_errors", []):
            print(f"  UNPARSED {parse_error}", file=sys.stderr)
        failed += summary["failed"] + summary["parsing_errors"]
        if kind == "terraform" and summary["resource_count"] < MIN_RESOURCES:
            print(f"  only {summary['resource_count']} resources scanned: is aws/ intact?",
                  file=sys.stderr)
            failed += 1
    if not any(report.get("check_type") == "terraform" for report in reports):
        print("aws-check: checkov reported no terraform scan", file=sys.stderr)
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
