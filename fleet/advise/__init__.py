"""The compute-budget advisor: how many reserved nodes to buy and on which committed-use term.

`fleet advise commitments` replays the team's own job history through the gpu-fleet policy for every
reservation size of a grid and prices each replay under every term (no commitment, 1 year, 3 years),
over several seeds where randomness matters (one where nothing is random).  It recommends the mix whose worst
fold regret is smallest (or, `--rule mean`, the cheapest) and, with `--train/--test`, scores it on demand it did
not see.

Modules: `grid` (sizes, terms, prices per term), `window` (train / test windows of a trace), `replay`
(the one adapter to the trace replay: one grid point -> its figures), `runner` (local process pool or
Ray), `recommend` (pure choice, savings, uncertainty, history-length caveats), `report` (plot + HTML).
"""
