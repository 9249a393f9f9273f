"""The JVM flags the suite gives its Spark drivers (scripts/test.sh) keep a full code cache.

C1-only JIT (``-XX:TieredStopAtLevel=1``) starts short-lived drivers faster but also shrinks the
default code cache to 48 MB; a long ingest filled it and the JVM stopped its SparkContext in the
middle of a job ("Out of space in CodeCache for adapters"), one CI run in four.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import missing_prerequisite

pytestmark = pytest.mark.unit


def test_the_drivers_code_cache_stays_at_least_240_mb():
    flags = os.environ.get("DKMSKS_DRIVER_JAVA_OPTS", "").split()
    if not flags:
        missing_prerequisite("DKMSKS_DRIVER_JAVA_OPTS is not set: run the suite through scripts/test.sh")
    java = shutil.which("java")
    assert java, "no java on PATH"
    out = subprocess.run([java, *flags, "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    size = int(re.search(r"ReservedCodeCacheSize\s*=\s*(\d+)", out).group(1))
    assert size >= 240 * 1024 * 1024, f"{flags} leave a code cache of {size / 2**20:.0f} MB"
