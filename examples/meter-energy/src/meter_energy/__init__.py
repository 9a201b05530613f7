"""Energy used per meter per hour, from cumulative meter readings: a tablecast processor.

Run it with ``tablecast run --processor meter_energy:HourlyEnergy --integrity ordered``.
"""

from meter_energy.energy import HourlyEnergy, Meter, Site

__all__ = ["HourlyEnergy", "Meter", "Site"]
