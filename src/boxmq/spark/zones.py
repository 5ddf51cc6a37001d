"""Spark's session time zone (`spark.sql.session.timeZone`) as a Python tzinfo.

A TIMESTAMP_NTZ reaches a Python writer as the wall-clock time it is, with no zone; Spark's
own conversions (a cast to TIMESTAMP, unix_millis) read it in the session time zone, so the
sink does too. Spark hands each task the settings a session set as local properties.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo

from boxmq.errors import InvalidArgument

__all__ = ["SESSION_TIME_ZONE", "session_zone"]

SESSION_TIME_ZONE = "spark.sql.session.timeZone"

# The offsets Spark takes besides region ids: +08:00, -5, UTC+01:30, GMT-08 (java ZoneId).
_OFFSET = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")

# java.time.ZoneId.SHORT_IDS, which Spark reads a zone name with: PST is Los Angeles's zone.
_SHORT_IDS = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "EST": "-05:00",
    "HST": "-10:00",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "MST": "-07:00",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
}


def session_zone(name: str | None) -> datetime.tzinfo | None:
    """The zone `name` names; None for no name (the session never set one: Spark then uses
    the driver JVM's default zone, which a local run shares with its workers).

    InvalidArgument for a name Python's tz database cannot read."""
    name = (name or "").strip()
    if not name:
        return None
    name = _SHORT_IDS.get(name, name)
    if (match := _OFFSET.fullmatch(name)) is not None:
        sign, hours, minutes, seconds = match.groups()
        offset = datetime.timedelta(
            hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0)
        )
        return datetime.timezone(-offset if sign == "-" else offset)
    if name in ("Z", "UTC", "GMT", "UT"):
        return datetime.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"boxmq sink: {SESSION_TIME_ZONE} is {name!r}, which Python's time zone database "
            "does not know, so a TIMESTAMP_NTZ expiration cannot be read in it: set a region "
            "id (e.g. 'Europe/Paris') or an offset (e.g. '+01:00'), or cast the column to "
            "TIMESTAMP"
        ) from None
