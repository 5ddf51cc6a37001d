"""The Spark settings of the tests' driver JVMs (the session's, crash_driver.py's)."""

from __future__ import annotations

# C1 only and the serial collector: a driver JVM that lives a minute or two spent most of its
# CPU in the C2 compiler's and the parallel collector's threads, about 35 s of CPU to start a
# session and run a first job, against about 19 s with these. The JVM's own flags, which no
# test checks; spark.driver.defaultJavaOptions goes before the extraJavaOptions that
# local_session sets.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_JVM = {"spark.driver.defaultJavaOptions": JVM_OPTIONS}
