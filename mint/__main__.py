from mint.cli import entry

entry()
