"""Estimated cost per hour of the node groups, from the AWS Pricing API (never a hard-coded price)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from automation.aws_clients import Pricing

# The Pricing API's attributes of a plain On-Demand hour: Linux, shared, no pre-installed software, not a reservation's.
ON_DEMAND_LINUX = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


@dataclass(frozen=True)
class CostEstimate:
    """USD per hour of the node groups, or None with the reason when a price could not be read."""

    usd_per_hour: float | None
    items: tuple[tuple[str, int, float | None], ...]  # (instance type, count, USD/h each)
    note: str = ""

    def text(self) -> str:
        if self.usd_per_hour is None:
            return f"unknown ({self.note})" if self.note else "unknown"
        return f"${self.usd_per_hour:,.2f}/h"

    def to_dict(self) -> dict[str, object]:
        return {
            "usd_per_hour": self.usd_per_hour,
            "items": [{"instance_type": t, "count": n, "usd_per_hour_each": p} for t, n, p in self.items],
            "note": self.note,
        }


def on_demand_price(pricing: Pricing, instance_type: str, region: str) -> float | None:
    """The On-Demand Linux, shared-tenancy hourly USD price of `instance_type` in `region`, or None."""
    terms = {"instanceType": instance_type, "regionCode": region, **ON_DEMAND_LINUX}
    filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()]
    resp = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters, MaxResults=10)
    for item in resp.get("PriceList", []):
        product = json.loads(item) if isinstance(item, str) else item
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                if usd is not None and dim.get("unit", "Hrs") == "Hrs" and float(usd) > 0:
                    return float(usd)
    return None


def estimate(pricing: Pricing, region: str, groups: list[tuple[str, int]]) -> CostEstimate:
    """Sum of count x price over `groups`; "unknown" (None) if the API cannot be reached or has no price."""
    try:
        items = [(itype, count, on_demand_price(pricing, itype, region)) for itype, count in groups]
    except (ClientError, BotoCoreError) as e:
        return CostEstimate(None, tuple((t, n, None) for t, n in groups), f"Pricing API: {type(e).__name__}")
    missing = [t for t, _, p in items if p is None]
    if missing:
        return CostEstimate(None, tuple(items), f"no On-Demand price for {', '.join(missing)} in {region}")
    return CostEstimate(round(sum(n * p for _, n, p in items if p is not None), 4), tuple(items))
