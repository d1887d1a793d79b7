"""The report's stylesheet, inlined into the page (no external fonts: the system's sans-serif)."""

CSS = """
:root { --fg: #1f2328; --dim: #636c76; --line: #d8dee4; --bg: #ffffff; --soft: #f6f8fa;
        --bad: #cf222e; --good: #1a7f37; --info: #0969da; --warn: #9a6700; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--soft); color: var(--fg);
       font: 14px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 40px; background: var(--bg); min-height: 100vh; }
header h1 { font-size: 24px; margin: 0 0 4px; }
header h1 .prog { color: var(--dim); font-weight: 400; font-size: 18px; margin-left: 8px; }
.facts { color: var(--dim); margin: 0 0 8px; }
.notes { color: var(--warn); margin: 4px 0 8px; padding-left: 20px; }
nav { position: sticky; top: 0; background: var(--bg); border-bottom: 1px solid var(--line);
      padding: 8px 0; margin-bottom: 16px; z-index: 1; }
nav a { margin-right: 18px; color: var(--info); text-decoration: none; font-weight: 600; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(210px, 1fr)); gap: 12px; margin: 8px 0 8px; }
.card { display: block; padding: 12px 14px; border: 1px solid var(--line); border-left-width: 5px;
        border-radius: 6px; text-decoration: none; color: var(--fg); background: var(--bg); }
.card b { display: block; font-size: 18px; }
.card span { color: var(--dim); font-size: 12.5px; overflow-wrap: anywhere; }
.card.bad { border-left-color: var(--bad); } .card.bad b { color: var(--bad); }
.card.good { border-left-color: var(--good); } .card.good b { color: var(--good); }
.card.info { border-left-color: var(--info); }
section { margin-top: 30px; }
h2 { font-size: 20px; border-bottom: 2px solid var(--line); padding-bottom: 4px; margin: 0 0 10px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
h3 small { color: var(--dim); font-weight: 400; }
.lead { color: var(--dim); margin: 0 0 10px; overflow-wrap: anywhere; }
.ok { color: var(--good); font-weight: 600; }
.warn { color: var(--warn); font-weight: 600; }
.more, .dim { color: var(--dim); font-size: 12.5px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 8px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font: 12px/1.4 ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace;
       overflow-wrap: anywhere; }
table.findings td:nth-child(3) { min-width: 110px; overflow-wrap: normal; }
table.findings td:nth-child(5) { min-width: 320px; }
table.findings td:nth-child(6) { min-width: 210px; }
table.findings .r { color: var(--dim); font-size: 12px; }
.kind { font-weight: 700; color: var(--bad); white-space: nowrap; }
.run { font-weight: 700; } .run.inserted { color: var(--good); } .run.removed { color: var(--bad); }
.run.changed { color: var(--warn); }
.delta { color: var(--bad); }
figure { margin: 10px 0 18px; padding: 10px; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--dim); font-size: 13px; margin-top: 4px; }
svg.plot { display: block; width: 100%; height: auto; max-width: 100%; }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--info); font-weight: 600; }
footer { margin-top: 36px; color: var(--dim); font-size: 12px; border-top: 1px solid var(--line); padding-top: 8px; }
"""
