"""What one simulated launch did: the figures a profiler shows and the errors a sanitizer reports."""

import copy


class LaunchReport:
    """One launch's report; `report["shared"]["bank_conflicts"]` reads it, `to_plain()` copies it as plain data."""

    def __init__(self, data: dict):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def to_plain(self) -> dict:
        return copy.deepcopy(self._data)

    def __str__(self):
        d = self._data
        g, s, b, a = d["global"], d["shared"], d["branches"], d["atomics"]
        out = [f"kernel {d['kernel']}: grid {tuple(d['grid'])} x block {tuple(d['block'])} = {d['threads']} threads, "
               f"simulated in {d['seconds']:.2f} s",
               f"  global memory  {g['requests']} requests, {g['sectors']} sectors of 32 B "
               f"(ideal {g['ideal_sectors']}): efficiency {g['efficiency']:.0%}",
               f"  shared memory  {s['requests']} requests, {s['wavefronts']} wavefronts, "
               f"{s['bank_conflicts']} bank conflicts ({s['bytes_per_block']} B per block)",
               f"  branches       {b['evaluations']} warp-level, {b['divergent']} divergent",
               f"  atomics        {a['requests']} requests, {a['operations']} operations"]
        if d["lines"]:
            out.append("  line  space   kind    requests  sectors(ideal)  wavefronts(conflicts)  divergent  source")
            for row in d["lines"]:
                sectors = f"{row['sectors']}({row['ideal_sectors']})" if row["space"] == "global" else ""
                waves = f"{row['wavefronts']}({row['bank_conflicts']})" if row["space"] == "shared" else ""
                divergent = str(row["divergent"]) if row["space"] == "branch" else ""
                out.append(f"  {row['line']:>4}  {row['space']:<7} {row['kind']:<7} {row['requests']:>8}  "
                           f"{sectors:>14}  {waves:>21}  {divergent:>9}  {row['source']}")
        out += [f"  ERROR ({e['kind']}, line {e['line']}, x{e['count']}): {e['message']}" for e in d["errors"]]
        if not d["errors"]:
            out.append("  no errors: no races, barrier or warp problems found")
        return "\n".join(out)

    __repr__ = __str__


class Launches(list):
    """The reports of the launches made inside one `profile()` block, in order."""

    def __str__(self):
        return "\n\n".join(map(str, self)) if self else "no kernel launches"

    __repr__ = __str__
