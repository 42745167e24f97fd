int demo_answer(void);
