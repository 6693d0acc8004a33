"""The course's tools: the command line, the batch training program, the bench and the course runner.

They sit outside the lessons' import path: no notebook imports them. Each runs as a program
(`python -m helpers ...`, `python -m helpers.tools.course_run`) and uses the package's plumbing
and its lesson module like any other user.
"""
