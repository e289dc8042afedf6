#!/usr/bin/env bash
# The AWS rung's static checks (a step of .ci/run): terraform fmt, the configuration loads
# (terraform providers), and checkov with no failed check except those waived in place
# (#checkov:skip=ID:reason beside the resource). terraform validate cannot run here: it needs
# the AWS provider, which cannot be downloaded (docs/guides/deploy-aws.md says what was exercised).
# checkov lives in its own virtualenv, aws/ci/.venv, pinned by aws/ci/requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)

if ! command -v terraform >/dev/null; then
    echo "aws-check: terraform is not on PATH; install Terraform >= 1.6 (the binary only:" \
         "fmt and providers need no provider plugins)" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# no ~/.terraformrc here: an empty CLI configuration keeps terraform from warning about it
touch "$work/terraformrc"
export TF_CLI_CONFIG_FILE="$work/terraformrc" TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1

echo "aws-check: terraform fmt -check -recursive aws" >&2
if ! terraform fmt -check -recursive -diff aws; then
    echo "aws-check: run 'terraform fmt -recursive aws' and commit the result" >&2
    exit 1
fi

# Loading the configuration parses every file and resolves the module call of the example
# (terraform get installs local modules without providers); a copy keeps .terraform out of aws/.
echo "aws-check: the module and aws/examples/minimal load (terraform providers)" >&2
mkdir "$work/aws"
tar -C aws --exclude=./ci/.venv -cf - . | tar -C "$work/aws" -xf -
terraform -chdir="$work/aws" providers >/dev/null
terraform -chdir="$work/aws/examples/minimal" get >/dev/null
terraform -chdir="$work/aws/examples/minimal" providers >/dev/null

venv=aws/ci/.venv
pinned=$(sed -n 's/^checkov==//p' aws/ci/requirements.txt)
if [ "$("$venv/bin/checkov" --version 2>/dev/null || true)" != "$pinned" ]; then
    echo "aws-check: installing checkov $pinned into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r aws/ci/requirements.txt
fi

echo "aws-check: checkov $pinned on aws/" >&2
# --skip-download: no calls to the vendor's platform (not reachable, and not wanted in CI)
set +e
"$venv/bin/checkov" --directory aws --skip-path aws/ci --framework terraform dockerfile \
    --skip-download --quiet --output json > "$work/checkov.json"
set -e
python3 aws/ci/checkov_summary.py "$work/checkov.json"
echo "aws-check: passed in $(( $(date +%s) - started )) s" >&2
