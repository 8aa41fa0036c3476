"""What a user reads of a workspace: evaluation reports shown and compared, the lineage report and its HTML page,
and the tables both the terminal and the page draw (rows built once, in mint.reporting.tables), with one number
format (mint.reporting.numbers).

It sits above the loop and the registry, whose data it reads; nothing below imports it.
"""
