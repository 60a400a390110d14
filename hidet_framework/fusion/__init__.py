"""Post-scheduling fusion (docs/design.md, Fusion): producers and consumers grafted onto
a scheduled anchor's tensor-element reads and stores.

``plan`` describes a group; ``graft_prologue`` / ``graft_epilogue`` rewrite a kernel's
reads / stores; ``fuse_group`` applies a whole group to the anchor's ScheduledTask;
``compose_task`` gives the fused operator its Task; ``chained_task`` is the fallback
(members run apart) when a graft is impossible. The partitioning that forms groups is
a graph pass, ``partition_fusion_groups.py`` (in `FUSION_PASSES`).
"""
from hidet_framework.fusion.chained_task import ChainedTask
from hidet_framework.fusion.compose_task import compose_task
from hidet_framework.fusion.fuse_group import fuse_group
from hidet_framework.fusion.partition_fusion_groups import (
    FUSED_OPERATOR, FUSION_PASSES, GROUP_ATTRIBUTE, partition_fusion_groups,
)
from hidet_framework.fusion.plan import FusionError, FusionGroup, GroupReport, Member, Source

__all__ = ["ChainedTask", "FUSED_OPERATOR", "FUSION_PASSES", "FusionError", "FusionGroup", "GROUP_ATTRIBUTE",
           "GroupReport", "Member", "Source", "compose_task", "fuse_group", "partition_fusion_groups"]
