"""Carbon and cost, as estimates from factors the user sets: never measurements.

The factors (grid carbon intensity in gCO2e/kWh, the data centre's PUE, a price per kWh, per
node-hour and per GPU-hour, the currency) come from the matrix's ``[estimates]`` table, over the
cluster profile's keys of the same names (recorded in ``bench.json`` when the matrix starts, with
where each came from). For one run of a configuration:

- facility energy = the energy hpcbench measured on the devices the run used × PUE (1 when
  not set); kWh = J / 3.6e6;
- CO2e (g) = facility kWh × carbon intensity;
- energy cost = facility kWh × price per kWh;
- allocation cost = node-hours × price per node-hour + GPU-hours × price per GPU-hour, the hours
  being the scheduler's elapsed time where its accounting says, else the run's own time.

What rests on energy is None where the energy is None (no energy runs, or not measured); each
figure is given per run (median) and per configuration (over its completed runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpcbench.jobs.profiles import FACTOR_BOUNDS, SpecError, check_factor, load_profile

if TYPE_CHECKING:
    from hpcbench.bench.analysis_types import ConfigAnalysis, CostEstimate, EstimateBlock, Factors
    from hpcbench.bench.reading.results_documents import EstimateFactors

FACTOR_KEYS = (*FACTOR_BOUNDS, "currency")
J_PER_KWH = 3.6e6


def check_factors(table: Any, where: str) -> EstimateFactors:
    """A matrix's ``[estimates]`` table, checked (``ValueError`` naming ``where`` and the key)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError(f"{where}: estimates: expected a table of {', '.join(FACTOR_KEYS)}")
    out = {}
    for key, value in table.items():
        if key not in FACTOR_KEYS:
            raise ValueError(
                f"{where}: estimates.{key}: unknown factor (known: {', '.join(FACTOR_KEYS)})"
            )
        try:
            out[key] = check_factor(f"{where}: estimates.{key}", key, value)
        except SpecError as err:
            raise ValueError(str(err)) from None
    return out


def chosen_factors(matrix_factors: EstimateFactors) -> Factors:
    """The factors a matrix runs with and where each came from: the chosen profile's (if any),
    under the matrix's ``[estimates]``."""
    values: EstimateFactors = {}
    sources: dict[str, str] = {}
    profile = load_profile()
    if profile is not None:
        for key, (value, label) in profile.info().items():
            if key in FACTOR_KEYS:
                values[key], sources[key] = value, label
    for key, value in matrix_factors.items():
        values[key], sources[key] = value, "the matrix's [estimates]"
    return {"values": values, "sources": sources}


def estimate(
    factors: EstimateFactors,
    energy_j: float | None,
    seconds: float | None,
    nodes: int,
    gpus: int,
) -> CostEstimate:
    """The estimates of one run (or of a sum of runs): None where a factor or the energy is
    missing."""
    pue = factors.get("pue", 1.0)
    kwh = energy_j * pue / J_PER_KWH if energy_j is not None else None
    intensity = factors.get("carbon_intensity")
    per_kwh = factors.get("price_per_kwh")
    node_h, gpu_h = factors.get("price_per_node_hour"), factors.get("price_per_gpu_hour")
    hours = seconds / 3600.0 if seconds is not None else None
    allocation = None
    if hours is not None and (node_h is not None or gpu_h is not None):
        allocation = (node_h or 0.0) * nodes * hours + (gpu_h or 0.0) * gpus * hours
    return {
        "facility_kwh": kwh,
        "co2e_g": kwh * intensity if kwh is not None and intensity is not None else None,
        "energy_cost": kwh * per_kwh if kwh is not None and per_kwh is not None else None,
        "allocation_cost": allocation,
    }


def estimate_block(
    cfg: ConfigAnalysis, factors: EstimateFactors, runs: int, seconds: float | None
) -> EstimateBlock | None:
    """One configuration's estimates: per run (from the median energy and time) and for its
    ``runs`` completed runs; None when no factor is set."""
    if not any(k in factors for k in FACTOR_BOUNDS if k != "pue"):
        return None
    energy = cfg.get("energy") or {}
    used = (energy.get("used_j") or {}).get("median") if energy.get("available") else None
    gpus = cfg["devices"] if cfg.get("device") == "cuda" else 0
    nodes = int(cfg.get("nodes") or 1)
    one = estimate(factors, used, seconds, nodes, gpus)
    every = {k: (v * runs if v is not None else None) for k, v in one.items()}
    return {
        "per_run": one,
        "per_config": every,
        "runs": runs,
        "energy_basis": "the devices each run used (hpcbench's measurement) × PUE"
        if used is not None
        else None,
        "currency": factors.get("currency", ""),
    }
