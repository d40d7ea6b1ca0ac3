"""The HTML layer of milabench: every page (run report, fleet report, history site,
comparison) is built from these modules, so escaping, style and drawing live once.

* `markup`: `el` (one element), `escape`, `raw`, `join`, `bullets`; plain text is always
  escaped, `Markup` never twice;
* `style`: the one stylesheet and the chart colours;
* `page`: the document skeleton (head, title, stylesheet, optional inline script);
* `table`: header, rows, numeric columns, row and cell classes, status classes;
* `charts`: inline SVG (line, bar, series with intervals and markers, interval rows,
  sparkline) on one `Frame` of axes and ticks.

Standard library only, and nothing from the rest of milabench: the pages sit above it.
"""
