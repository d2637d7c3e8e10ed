"""Units and Quadlets: install target, user, memlock, restart, env files, ExecStart= arguments, ports,
image form, compile cache, container paths (B-UN-1/2, B-RAM-4, B-SH-3, B-VL-13..16, INC-35/36/53/79/85)."""

import pytest

from fleetgate.plugin import Seam


@pytest.mark.check("unit-install")
def test_unit_install(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("unit-user")
def test_unit_user(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("unit-memlock")
def test_unit_memlock(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("unit-restart")
def test_unit_restart(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("unit-env-files")
def test_unit_env_files(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("unit-exec-args")
def test_unit_exec_args(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("quadlet-image")
def test_quadlet_image(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("quadlet-compile-cache")
def test_quadlet_compile_cache(seam: Seam) -> None:
    seam.run()


@pytest.mark.check("container-paths")
def test_container_paths(seam: Seam) -> None:
    seam.run()
