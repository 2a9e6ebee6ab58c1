"""The concept cards, one module per topic (see aisys.drill.card)."""
