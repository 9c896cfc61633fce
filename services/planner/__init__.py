"""The planner service: plan requests in, plans and plan-task events out."""
