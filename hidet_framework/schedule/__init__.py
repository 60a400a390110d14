"""Scheduling: what a scheduled task is, the templates plugins write (`Template`), and
the rule-based auto-scheduler."""
from hidet_framework.schedule.auto_scheduler import SchedulingError, auto_schedule
from hidet_framework.schedule.template import SPACE_LIMITS, Template
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
