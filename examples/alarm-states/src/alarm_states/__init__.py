"""A device's overheating alarm as a state machine: a tablecast processor.

Run it with ``tablecast run --processor alarm_states:OverheatAlarm``.
"""

from alarm_states.alarm import COOL, HOT, Device, OverheatAlarm, Phase

__all__ = ["COOL", "HOT", "Device", "OverheatAlarm", "Phase"]
