#!/usr/bin/env bash
# Checks Gantry's monitoring assets in deploy/monitoring/ offline:
#   - prometheus.yml and alertmanager.yml, rendered with temporary values for their
#     placeholders, with `promtool check config` and `amtool check-config`;
#   - the alert rules with `promtool check rules` and their unit tests with `promtool test rules`;
#   - Gantry's label contract on every rule, and that every rule has a firing and a
#     not-firing unit test;
#   - the Grafana dashboards: valid JSON (jq), structure, and every PromQL expression parses.
# That every metric name the dashboards and rules use is really exported is checked against a
# real scrape by crates/gantry/tests/monitoring.rs (fixed_ports_answer_..._is_exported), which
# `make test` runs with the other Rust tests: it needs a running `gantry up --monitoring`.
# No Grafana dashboard schema validator is packaged on PyPI or npm (@grafana/schema is
# TypeScript types only), so the structure checks below stand in for one.
# Installs what it needs from Debian's packages when missing. Exits non-zero on any failure.
# Called by `make test` (scripts/test.sh); run it on its own after editing deploy/monitoring/.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MON="$ROOT/deploy/monitoring"

# ----------------------------------------------------------------------------- dependencies
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v prometheus-node-exporter >/dev/null 2>&1 || need+=(prometheus-node-exporter)
command -v jq >/dev/null 2>&1 || need+=(jq)
python3 -c 'import yaml' >/dev/null 2>&1 || need+=(python3 python3-yaml)
if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "check-monitoring: missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root" >&2
        exit 1
    fi
    echo "check-monitoring: installing ${need[*]}"
    apt_install() {
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
            --no-install-recommends "$@"
    }
    if ! apt_install "${need[@]}" >/dev/null; then
        apt-get -o DPkg::Lock::Timeout=600 update >/dev/null && apt_install "${need[@]}" >/dev/null || {
            echo "check-monitoring: could not install ${need[*]}" >&2
            exit 1
        }
    fi
fi

# keep_firing_for in the rules needs Prometheus 2.42 or later.
ver="$(promtool --version 2>&1 | sed -n 's/^promtool, version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
read -r major minor <<<"${ver:-0 0}"
if ((major < 2 || (major == 2 && minor < 42))); then
    echo "check-monitoring: promtool ${major}.${minor} is too old; the rules need Prometheus >= 2.42" >&2
    exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

failures=0
step() { echo "== $*"; }
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
run() { # run CMD...: prints its output, counts a failure on a non-zero exit
    local out
    if ! out="$("$@" 2>&1)"; then
        printf '%s\n' "$out"
        fail "$*"
        return 1
    fi
    printf '%s\n' "$out"
}

# ----------------------------------------------------------------------------- placeholders
# The placeholders `gantry up --monitoring` substitutes; keep this list in step with it and
# with the comments at the top of prometheus.yml and alertmanager.yml.
step "placeholders"
check_placeholders() { # FILE EXPECTED...
    local file="$1"
    shift
    local found expected
    found="$(grep -o '{{[A-Z_]*}}' "$file" | sort -u | tr '\n' ' ')"
    expected="$(printf '{{%s}}\n' "$@" | sort -u | tr '\n' ' ')"
    if [[ "$found" != "$expected" ]]; then
        fail "$file: placeholders are [${found}], expected [${expected}]"
    else
        echo "$(basename "$file"): ${found}"
    fi
}
check_placeholders "$MON/prometheus.yml" SERVER TOKEN_FILE ALERTMANAGER
check_placeholders "$MON/alertmanager.yml" WEBHOOK_URL WEBHOOK_TOKEN_FILE

# Render a copy as `gantry up --monitoring` would (rules/ stays beside prometheus.yml).
mkdir -p "$TMP/render"
cp -r "$MON/." "$TMP/render/"
echo "check-monitoring-token" >"$TMP/token"
echo "check-monitoring-webhook-token" >"$TMP/webhook-token"
sed -e "s#{{SERVER}}#127.0.0.1:18080#g" \
    -e "s#{{TOKEN_FILE}}#$TMP/token#g" \
    -e "s#{{ALERTMANAGER}}#127.0.0.1:19093#g" \
    "$MON/prometheus.yml" >"$TMP/render/prometheus.yml"
sed -e "s#{{WEBHOOK_URL}}#http://127.0.0.1:18080/api/v1/monitoring/alertmanager#g" \
    -e "s#{{WEBHOOK_TOKEN_FILE}}#$TMP/webhook-token#g" \
    "$MON/alertmanager.yml" >"$TMP/render/alertmanager.yml"
for f in prometheus.yml alertmanager.yml; do
    if grep -q '{{[A-Z_]*}}' "$TMP/render/$f"; then
        fail "$f: placeholders left after rendering: $(grep -o '{{[A-Z_]*}}' "$TMP/render/$f" | sort -u | tr '\n' ' ')"
    fi
done

# ----------------------------------------------------------------------------- prometheus
step "promtool check config (rendered prometheus.yml)"
if out="$(promtool check config "$TMP/render/prometheus.yml" 2>&1)"; then
    printf '%s\n' "$out"
    grep -q 'SUCCESS: [1-9][0-9]* rule files found' <<<"$out" ||
        fail "prometheus.yml: its rule_files glob found no rule file"
else
    printf '%s\n' "$out"
    fail "promtool check config (rendered prometheus.yml)"
fi

step "promtool check rules"
run promtool check rules "$MON"/rules/*.yml

step "promtool test rules"
run promtool test rules "$MON"/rules/tests/*.yml

# ----------------------------------------------------------------------------- alertmanager
step "amtool check-config (rendered alertmanager.yml)"
run amtool check-config "$TMP/render/alertmanager.yml"
route_of() { # LABELS... -> the matching route's path, as amtool prints it
    amtool config routes test --config.file="$TMP/render/alertmanager.yml" --tree "$@" 2>/dev/null |
        grep -c 'gantry_watchdog="true"'
}
[[ "$(route_of alertname=GantryWatchdog gantry_watchdog=true)" == 1 ]] ||
    fail "alertmanager.yml: the watchdog does not take its own route"
[[ "$(route_of alertname=NodeFilesystemFull node=n1 gantry_hold=cordon gantry_release=auto)" == 0 ]] ||
    fail "alertmanager.yml: a hold alert takes the watchdog route"

# ----------------------------------------------------------------------------- contract lint
step "label contract and test coverage"
run python3 - "$MON" <<'PY'
import glob, os, re, sys
import yaml

mon = sys.argv[1]
errors = []

def dur(s):
    total = 0
    for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", str(s)):
        total += int(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}[u]
    return total

rules = {}
for path in sorted(glob.glob(os.path.join(mon, "rules", "*.yml"))):
    for group in yaml.safe_load(open(path))["groups"]:
        for r in group["rules"]:
            if "alert" not in r:
                continue
            name = r["alert"]
            if name in rules:
                errors.append(f"{name}: defined twice")
            rules[name] = r
            labels, ann = r.get("labels", {}), r.get("annotations", {})
            if not ann.get("summary") or not ann.get("description"):
                errors.append(f"{name}: needs annotations summary and description")
            if labels.get("gantry_watchdog") == "true":
                if "gantry_hold" in labels or "gantry_release" in labels:
                    errors.append(f"{name}: the watchdog must not place a hold")
                continue
            if labels.get("gantry_hold") not in ("cordon", "evict"):
                errors.append(f"{name}: label gantry_hold must be cordon or evict")
            if labels.get("gantry_release") not in ("auto", "admin"):
                errors.append(f"{name}: label gantry_release must be auto or admin")
            if "node" in labels:
                errors.append(f"{name}: node must come from the series, not be set by the rule")
            if "$labels.node" not in ann.get("summary", ""):
                errors.append(f"{name}: summary must name the node ({{{{ $labels.node }}}})")
            if "$value" not in ann.get("summary", "") and "$value" not in ann.get("description", ""):
                errors.append(f"{name}: summary or description must give the figure ({{{{ $value }}}})")
            if not re.search(r"\bby\s*\(\s*node\b", r["expr"]):
                errors.append(f"{name}: aggregate by (node, ...) so the alert carries node and nothing scrape-specific")

if not any(r.get("labels", {}).get("gantry_watchdog") == "true" for r in rules.values()):
    errors.append("no watchdog rule (label gantry_watchdog: \"true\")")

firing, quiet = set(), set()
for path in sorted(glob.glob(os.path.join(mon, "rules", "tests", "*.yml"))):
    for test in yaml.safe_load(open(path)).get("tests", []):
        for case in test.get("alert_rule_test", []) or []:
            name = case["alertname"]
            if name not in rules:
                errors.append(f"{os.path.basename(path)}: tests unknown alert {name}")
                continue
            exp = case.get("exp_alerts") or []
            (firing if exp else quiet).add(name)
            rlabels = rules[name].get("labels", {})
            for a in exp:
                got = a.get("exp_labels", {})
                if rlabels.get("gantry_watchdog") != "true" and "node" not in got:
                    errors.append(f"{os.path.basename(path)}: {name} at {case['eval_time']}: expected alert without node")
                for k, v in rlabels.items():
                    if str(got.get(k)) != str(v):
                        errors.append(f"{os.path.basename(path)}: {name}: expected label {k}={got.get(k)!r}, rule says {v!r}")
                if "summary" not in a.get("exp_annotations", {}):
                    errors.append(f"{os.path.basename(path)}: {name} at {case['eval_time']}: check the summary too")

for name, r in rules.items():
    if name not in firing:
        errors.append(f"{name}: no unit test where it fires")
    if name not in quiet and r.get("labels", {}).get("gantry_watchdog") != "true":
        errors.append(f"{name}: no unit test where it does not fire")

am = yaml.safe_load(open(os.path.join(mon, "alertmanager.yml")))
route = am["route"]
if set(route.get("group_by", [])) != {"node", "alertname"}:
    errors.append("alertmanager.yml: route.group_by must be [node, alertname]")
if dur(route.get("group_wait", "30s")) > 5 or dur(route.get("group_interval", "5m")) > 30:
    errors.append("alertmanager.yml: group_wait/group_interval are too slow for holds")
wd = [r for r in route.get("routes", []) if any("gantry_watchdog" in m for m in r.get("matchers", []))]
if not wd or dur(wd[0].get("repeat_interval", "4h")) > 120:
    errors.append("alertmanager.yml: the watchdog needs a route with repeat_interval of at most 2m")
for rcv in am["receivers"]:
    for wh in rcv.get("webhook_configs", []):
        if wh.get("send_resolved") is not True or wh.get("max_alerts") != 0:
            errors.append(f"alertmanager.yml: receiver {rcv['name']}: send_resolved: true and max_alerts: 0")
        if not wh.get("http_config", {}).get("authorization", {}).get("credentials_file"):
            errors.append(f"alertmanager.yml: receiver {rcv['name']}: needs the webhook token")

for e in errors:
    print(e)
if errors:
    sys.exit(1)
print(f"{len(rules)} alert rules: labels, annotations and tests (firing and not firing) in order")
PY

# ----------------------------------------------------------------------------- dashboards
step "dashboards"
shopt -s nullglob
dashboards=("$MON"/dashboards/*.json)
((${#dashboards[@]} >= 3)) || fail "expected at least 3 dashboards in $MON/dashboards, found ${#dashboards[@]}"
uids=()
for f in "${dashboards[@]}"; do
    b="$(basename "$f")"
    if ! jq empty "$f" 2>"$TMP/jq.err"; then
        fail "$b: not valid JSON: $(cat "$TMP/jq.err")"
        continue
    fi
    # Structure: schema version, the DS_PROMETHEUS input, every panel and query on it, ids.
    if ! problems="$(jq -r '
        def panels: .panels[]? | ., (.panels[]?);
        [ (if (.schemaVersion // 0) < 36 then "schemaVersion \(.schemaVersion) < 36" else empty end),
          (if ([.__inputs[]?.name] | index("DS_PROMETHEUS")) == null then "no DS_PROMETHEUS in __inputs" else empty end),
          (if (.uid // "") == "" or (.title // "") == "" then "needs a uid and a title" else empty end),
          ([panels | .id] | group_by(.) | map(select(length > 1) | "panel id \(.[0]) used twice") | .[]),
          (panels | select(.type != "row")
             | (if .datasource.uid != "${DS_PROMETHEUS}" then "panel \(.id) \(.title): datasource is not ${DS_PROMETHEUS}" else empty end),
               (if ((.targets // []) | length) == 0 then "panel \(.id) \(.title): no queries" else empty end),
               (.targets[]? | select((.expr // "") == "" or .datasource.uid != "${DS_PROMETHEUS}")
                  | "panel query \(.refId): empty or not on ${DS_PROMETHEUS}")),
          (.templating.list[]? | select(.type == "query" and .datasource.uid != "${DS_PROMETHEUS}")
             | "variable \(.name): datasource is not ${DS_PROMETHEUS}")
        ] | .[]' "$f")"; then
        fail "$b: jq could not inspect it"
        continue
    fi
    if [[ -n "$problems" ]]; then
        while IFS= read -r p; do fail "$b: $p"; done <<<"$problems"
    fi
    uids+=("$(jq -r .uid "$f")")

    # PromQL: every panel query and every query variable, with Grafana's variables replaced,
    # becomes a recording rule; `promtool check rules` then parses them all offline.
    jq --arg dash "$(jq -r .uid "$f" | tr -c 'A-Za-z0-9_\n' '_')" '
        def grafana_vars:
            gsub("\\$\\{?__(rate_interval|interval|range)(:[a-z]+)?\\}?"; "5m")
            | gsub("\\$\\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\\}?"; "gantry_dashboard_var");
        def panels: .panels[]? | ., (.panels[]?);
        [ (panels | select(.type != "row") | . as $p | .targets[]?
              | {record: "dashboard:\($dash):panel_\($p.id)_\(.refId)", expr: (.expr | grafana_vars)}),
          (.templating.list[]? | select(.type == "query")
              | (.query | if type == "object" then .query else . end) as $q
              | ( ($q | capture("^\\s*label_values\\((?<s>.*?)(,\\s*[A-Za-z_][A-Za-z0-9_]*)?\\s*\\)\\s*$"))
                  // ($q | capture("^\\s*query_result\\((?<s>.*)\\)\\s*$"))
                  // {s: null} ).s as $sel
              | select($sel != null and $sel != "")
              | {record: "dashboard:\($dash):variable_\(.name)", expr: ($sel | grafana_vars)})
        ] | {groups: [{name: "dashboard-\($dash)", rules: .}]}' "$f" >"$TMP/$b.rules.json" ||
        { fail "$b: could not extract its queries"; continue; }
    n="$(jq '.groups[0].rules | length' "$TMP/$b.rules.json")"
    if out="$(promtool check rules "$TMP/$b.rules.json" 2>&1)"; then
        echo "$b: valid JSON, $n PromQL expressions parse"
    else
        printf '%s\n' "$out"
        fail "$b: PromQL that does not parse (names above: dashboard:<uid>:panel_<id>_<refId>)"
    fi
done
dups="$(printf '%s\n' "${uids[@]}" | sort | uniq -d)"
[[ -z "$dups" ]] || fail "dashboard uid used twice: $dups"

echo
if ((failures)); then
    echo "check-monitoring: $failures check(s) FAILED" >&2
    exit 1
fi
echo "check-monitoring: all checks passed"
