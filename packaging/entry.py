"""The frozen executable's entry point: clockd or clockctl by the name it is called by."""

from clockctl.multicall import main

main()
