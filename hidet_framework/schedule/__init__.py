"""Scheduling: what a scheduled task is, and the rule-based auto-scheduler."""
from hidet_framework.schedule.auto_scheduler import SchedulingError, auto_schedule
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
