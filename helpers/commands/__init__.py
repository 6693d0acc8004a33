"""The course's commands: the command line, the batch training program, the bench, the course runner and check-script.

They sit outside the lessons' import path: no notebook imports them. Each runs as a program
(`python -m helpers ...`, `python -m helpers.commands.course_run`) and uses the package's plumbing
and its lesson module like any other user.
"""
